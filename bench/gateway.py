"""Gateway benchmark: N chats x M messages through the gateway as `chinwag run` builds it.

    python -m bench.gateway [--chats 1000] [--messages 20] [--known 10000] [--cache 64]
                            [--rate 1000] [--mode instant|http|both] [--delivery on|off|both] [--no-mirrors]

Everything is the production path, wired by the one composition root (gateway.service.app.build_app)
— SessionDB (WAL, group commit) on a temp dir, mirrors (JSONL + sessions.json), SessionStore (reset
policy "none", so no notices mid-count), GatewayRunner with its lanes, persisted de-duplication, the
agent cache (at its bound: far fewer slots than chats), the real agent loop and the real `openai`
client — except the platform (an in-memory adapter) and what answers the model calls, which is
swapped through the client's own `http_client` (bench/model.py). The turns ask the model to stream and
the model answers with an event stream, as in production; the in-memory adapter has no editable reply,
so the base adapter's SendOnFinish sends each reply whole at the end. What streaming shows on each
platform is measured by bench/streaming.py: the time from the model's first token to the first visible
text on each platform fake, and throughput with streaming on vs off in the same run.

- `instant`: an httpx2 transport answers each request in-process at once, so the whole latency is
  what the gateway (and the SDK building and parsing the request) adds.
- `http`: a model server on 127.0.0.1 (in this process, so its serving cost shares the CPU). Each
  model round trip is timed in the transport and subtracted to get the time the gateway adds.
  Smaller by default (--http-rate, --http-messages): the HTTP model dominates.

Before the runs, `--known` sessions with key entries are created, and the store's raw append rate
is measured on the same DB: concurrent `aappend_message` (group commit) and one at a time.
Then two phases per mode, each on its own N fresh chats:
1. open loop: messages arrive at `--rate` per second whatever happens, round-robin over the chats;
   latency = arrival to reply (the time the gateway adds at that load);
2. closed loop: every chat at once, each sending its next message when its reply arrived (the most
   the gateway can do; latency is then mostly waiting behind the other N-1 chats).
Printed: messages/s, latency and gateway-added p50/p99, intake (what a webhook's 2xx waits for)
p50/p99, peak RSS, CPU by thread, GC pauses.

Delivery (DESIGN §11) on and off, in the same run (`--delivery both`, the default), each on its own
home: "on" is the production path (every intake commits an inbox row before it returns, the answer
commits its outbox row and the entry's done mark with the assistant message, each sent part is
recorded). "off" is the bench's baseline only, `without_delivery` below, never a setting: an inbox
that admits without committing anything and an outbox that commits and records nothing (the turn's
reply is sent straight away through the adapter's reply writer). That is the gateway as it was before the
inbox, minus its old seen-mark, which rode in the user message's transaction. The comparison is
printed as ratios beside the absolute figures.

Measured with the defaults (`--mode instant --delivery both`, 1,000 chats x 20 messages per phase) on
2 CPUs shared with other jobs (load average 5-6): closed loop 426 msg/s on, 433 off (0.98x); main
thread 1.3 ms CPU per message. Before agent.llm handed its body to the SDK as `extra_body` (the "off"
half of the same bench in the same session, load ~4): 87 msg/s, 5.2 ms per message. Where those went,
by cProfile (`python -m cProfile -o out.prof -m bench.gateway --chats 200 --messages 10 --mode instant
--delivery on --known 1000`), as shares of the turns' time: ~65% the openai SDK's request transform
(walking every history message and tool schema against its TypedDicts, an identity for our JSON),
~20% the rest of the SDK and httpx2 (request, header and URL building, the mock transport, response
parsing); the gateway's own parts are small: storage ~1.5%, the turn's persistence and the inbox ~2%,
building agents 0.4% (40,000 built: the cache holds 64 of the 1,000 chats; the system prompt and
tool schemas in that < 0.3%), so nothing there is cached further. At 1,000 msg/s offered neither
keeps up on that machine, so the open loop's latencies are queueing.

Telemetry off vs on (`--telemetry both`, with inbox/outbox on): "on" exports every span and the
metrics over OTLP/HTTP to bench/otlp_sink.py, a sink in a process of its own as a collector is.
Measured (`--mode instant --delivery on --telemetry both --chats 200 --messages 10 --known 2000
--rate 80`, two rounds, load average 7-9 on the 2 CPUs, main's code run beside it in the same
session): main-thread CPU per message off 2.24 / 2.51 ms, main 2.40 / 2.33 ms, on 2.79 / 3.04 ms
(+0.55 ms: the SDK's spans and instruments; its batch thread 0.9 s more per 4,000 messages);
closed loop on 124 / 175 msg/s vs off 150 / 285 (0.83x / 0.61x; main 170 / 453 in the same
rounds: at that load throughput moves 2x between runs); open loop at 80 msg/s: all answered,
time added p99 on 493 / 217 ms vs off 194 / 148 ms (main 153 / 477).

The open loop starts each intake as its own task, as a webhook server runs one handler per request:
awaiting each intake in turn (which now includes the inbox commit) would cap the offered rate at
one commit's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import resource
import sqlite3
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.model import SPENT, instant_client, serve_model, timed_client
from bench.otlp_sink import Sink
from bench.stats import percentile
from gateway.config.load import parse_config
from gateway.db import SessionDB, new_session_id
from gateway.runtime.agent_factory import AgentFactory
from gateway.runtime.delivery import Inbox, Outbox
from gateway.runtime.runner import GatewayRunner
from gateway.service.app import build_app, tune_gc
from gateway.source import Platform, SessionSource
from platforms.base import InboundMessage, PlatformAdapter


class BenchAdapter(PlatformAdapter):
    """Delivers messages to the runner and wakes the chat's waiter when the reply is sent."""

    platform = Platform.TELEGRAM
    max_message_length = 4096

    def __init__(self) -> None:
        super().__init__()
        self.on_message: Any = None
        self.waiters: dict[str, asyncio.Future] = {}
        self.outstanding: dict[str, deque[float]] = {}  # open loop: chat -> send times, in order
        self.latencies: list[float] = []
        self.added: list[float] = []
        self.added_later: list[float] = []  # leaving out each chat's first message (session creation)
        self.replied: set[str] = set()
        self.bad = 0

    async def start(self, on_message: Any) -> None:
        self.on_message = on_message

    async def stop(self) -> None:
        pass

    async def send(
        self, source: SessionSource, text: str, reply_to: str | None = None, key: str | None = None
    ) -> list[str]:
        waiter = self.waiters.pop(source.chat_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(text)
        starts = self.outstanding.get(source.chat_id)
        if starts:
            elapsed = time.perf_counter() - starts.popleft()
            self.latencies.append(elapsed)
            self.added.append(elapsed - SPENT.pop(source.chat_id, 0.0))
            if source.chat_id in self.replied:
                self.added_later.append(self.added[-1])
            self.replied.add(source.chat_id)
            if not text.startswith("ok: "):
                self.bad += 1
        return ["x"]


class UncommittedInbox(Inbox):
    """The bench's "off" baseline: every message admitted at once, nothing committed (no inbox row,
    so no dedup and nothing taken up after a crash). Never used outside this file."""

    async def admit(self, msg: InboundMessage, chat_key: str) -> bool:
        return True


class UnrecordedOutbox(Outbox):
    """The bench's "off" baseline: a reply commits no outbox row (nothing to finish either: the
    inbox holds no entries) and its send is not recorded. Never used outside this file."""

    @staticmethod
    def reply_op(target: InboundMessage, text: str, answers: Any, outcome: str = "answered") -> Any:
        return (lambda conn, message_id=None: 0), {"id": 0}

    async def commit(self, target: InboundMessage, text: str, answers: Any, outcome: str) -> int:
        return 0

    async def deliver(
        self, row_id: int, source: SessionSource, text: str, reply_to: str | None, done: int = 0, key: Any = None
    ) -> bool:
        await self.adapters[source.platform.value].begin_reply(source, reply_to).finish(text)
        return True


def without_delivery(runner: GatewayRunner) -> None:
    """Take the inbox and the outbox out of a built runner (the "off" baseline): intake no longer
    commits, and the turn sends its answer without committing or recording it."""
    runner.inbox = UncommittedInbox(runner.db)
    runner.turns.outbox = UnrecordedOutbox(runner.db, runner.adapters)


def thread_cpu() -> dict[str, float]:
    """CPU seconds per live thread (Linux /proc), by Python thread name."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for t in threading.enumerate():
        try:
            fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = t.name.split(" (")[0]
        name = "executor" if name.startswith(("asyncio_", "ThreadPoolExecutor")) else name
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


class GcPauses:
    """Cyclic-collector pauses (they stop the event loop), by generation."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._start))

    def summary(self) -> str:
        if not self.pauses:
            return "none"
        worst = max(p for _, p in self.pauses) * 1000
        total = sum(p for _, p in self.pauses) * 1000
        full = sum(1 for g, _ in self.pauses if g == 2)
        return f"{len(self.pauses)} collections ({full} full), {total:.0f} ms in all, longest {worst:.1f} ms"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def precreate(db: SessionDB, known: int) -> None:
    """`known` sessions of other chats, each with a key entry and a message (one transaction)."""
    now = time.time()
    records = []
    for i in range(known):
        sid = new_session_id(now - known + i)
        records.append(
            {
                "session": {
                    "id": sid,
                    "source": "telegram",
                    "user_id": f"k{i}",
                    "session_key": f"agent:main:telegram:dm:k{i}",
                    "started_at": now - 3600,
                    "title": None,
                },
                "messages": [
                    {"role": "user", "content": f"old message {i} about topic {i % 97}", "timestamp": now - 3600}
                ],
            }
        )
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


async def closed_loop(
    adapter: BenchAdapter, chats: int, messages: int, tag: str, first: int = 0
) -> tuple[float, list[float], list[float], int]:
    """Every chat at once, each sending its next message when the previous reply arrived."""
    latencies: list[float] = []
    added: list[float] = []
    errors = 0

    async def chat(i: int) -> None:
        nonlocal errors
        source = SessionSource(platform="telegram", chat_id=str(i), chat_type="dm", user_id=str(i))
        loop = asyncio.get_running_loop()
        for n in range(messages):
            waiter = loop.create_future()
            adapter.waiters[source.chat_id] = waiter
            started = time.perf_counter()
            await adapter.on_message(InboundMessage(source, f"message {n} from chat {i}", f"{tag}-{i}-{n}"))
            reply = await asyncio.wait_for(waiter, 120)
            elapsed = time.perf_counter() - started
            if not reply.startswith("ok: "):
                errors += 1
            latencies.append(elapsed)
            added.append(elapsed - SPENT.pop(source.chat_id, 0.0))

    started = time.perf_counter()
    await asyncio.gather(*(chat(first + i) for i in range(chats)))
    return time.perf_counter() - started, latencies, added, errors


async def open_loop(
    adapter: BenchAdapter, runner: GatewayRunner, chats: int, messages: int, rate: float, tag: str
) -> tuple[float, list[float]]:
    """Messages arrive at `rate` per second whatever the gateway does, round-robin over the chats
    (so at 1,000 msg/s each of 1,000 chats writes once a second). Latency = arrival to reply.
    Each intake is its own task (a webhook server's handler per request); returns the wall time and
    each intake's duration (arrival until the adapter may acknowledge)."""
    total = chats * messages
    intakes: list[asyncio.Future] = []
    acks: list[float] = []

    async def intake(msg: InboundMessage, arrived: float) -> None:
        await adapter.on_message(msg)
        acks.append(time.perf_counter() - arrived)

    started = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - started) * rate) + 1)
        while sent < due:
            i, n = sent % chats, sent // chats
            source = SessionSource(platform="telegram", chat_id=str(i), chat_type="dm", user_id=str(i))
            arrived = time.perf_counter()
            adapter.outstanding.setdefault(source.chat_id, deque()).append(arrived)
            msg = InboundMessage(source, f"message {n} from chat {i}", f"{tag}-{i}-{n}")
            intakes.append(asyncio.ensure_future(intake(msg, arrived)))  # tasks start in arrival order
            sent += 1
        await asyncio.sleep(0.001)
    await asyncio.gather(*intakes)
    await runner.drain()
    return time.perf_counter() - started, acks


async def run_mode(
    mode: str, args: argparse.Namespace, workdir: Path, delivery: bool = True, otlp: str = ""
) -> dict[str, Any]:
    home = workdir / f"{mode}-delivery-{'on' if delivery else 'off'}{'-traced' if otlp else ''}"
    served: web.AppRunner | None = None
    if mode == "http":
        served, base_url = await serve_model()
        http_client = timed_client()
    else:
        base_url = "http://127.0.0.1:9/v1"  # never contacted: the transport answers itself
        http_client = instant_client()
    config = parse_config(
        {
            "model": {"base_url": base_url, "api_key": "k", "name": "fake-model", "max_iterations": 4},
            "session": {"reset": {"mode": "none"}},  # no reset notices in the middle of the count
            "gateway": {
                "busy_ack": False,
                "max_pending": 1000,
                "agent_cache": {"max_agents": args.cache, "idle_ttl_minutes": 30},
            },
            "platforms": {"telegram": {"token": "x", "allowed_users": ["*"]}},
            "telemetry": {"otlp_endpoint": otlp},  # '' (off): the SDK is not even imported
        },
        env={},
        home_override=home,
    )
    adapter = BenchAdapter()
    app = build_app(config, adapters=[adapter], http=False, mirrors=args.mirrors, http_client=http_client)
    db, runner = app.db, app.runner
    if not delivery:
        without_delivery(runner)
    precreate(db, args.known)
    raw = await raw_append_rate(db, min(args.chats, 1000), 10)
    if app.mirrors is not None:
        app.mirrors.repair()  # as `chinwag run` does at start (quietly: the setup wrote no transcripts)
    # Copy the setup's writes (tens of MB of WAL) into the database now: otherwise that one big
    # checkpoint runs during the first measured second and takes one of the CPUs from the gateway.
    with contextlib.closing(sqlite3.connect(home / "state.db")) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    tune_gc()  # as `chinwag run` does at start (App.start; upkeep is left out of the count)
    await runner.start()
    gc.collect()

    result: dict[str, Any] = {
        "mode": mode,
        "delivery": delivery,
        "traced": bool(otlp),
        "raw_concurrent": raw[0],
        "raw_sequential": raw[1],
    }
    cpu_before = thread_cpu()
    pauses = GcPauses()
    # 1. open loop at the target rate: the latency a message sees at that load
    # The HTTP model costs ~5 ms of this process's CPU per call (client and fake server share it),
    # so that mode offers less and runs fewer messages (--http-rate, --http-messages).
    messages = args.messages if mode == "instant" else args.http_messages
    rate = args.rate if mode == "instant" else args.http_rate
    result["messages"], result["rate_offered"] = messages, rate
    wall, acks = await open_loop(adapter, runner, args.chats, messages, rate, "open")
    total = args.chats * messages
    result["open"] = {
        "messages": total,
        "wall": wall,
        "rate": total / wall,
        "ack_p50": percentile(acks, 0.5) * 1000,
        "ack_p99": percentile(acks, 0.99) * 1000,
        "bad": adapter.bad,
        "answered": len(adapter.latencies),
        "p50": percentile(adapter.latencies, 0.5) * 1000,
        "p99": percentile(adapter.latencies, 0.99) * 1000,
        "added_p50": percentile(adapter.added, 0.5) * 1000,
        "added_p99": percentile(adapter.added, 0.99) * 1000,
        "later_p50": percentile(adapter.added_later, 0.5) * 1000,
        "later_p99": percentile(adapter.added_later, 0.99) * 1000,
    }
    # 2. closed loop, every chat at once: the most the gateway can do
    # (other chats than the open loop's, so each phase is N fresh chats x M messages)
    wall, latencies, added, errors = await closed_loop(adapter, args.chats, messages, "closed", args.chats)
    await runner.drain()
    result["closed"] = {
        "messages": total,
        "wall": wall,
        "rate": total / wall,
        "bad": errors,
        "p50": percentile(latencies, 0.5) * 1000,
        "p99": percentile(latencies, 0.99) * 1000,
    }
    commits, writes = db.commit_stats
    cpu_after = thread_cpu()
    gc.callbacks.remove(pauses._callback)
    result["gc"] = pauses.summary()
    result["cpu"] = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_after.items() if v - cpu_before.get(k, 0.0) > 0.05}
    result |= {
        "cache": runner.cache_size(),
        "evictions": runner.cache.evictions,
        "agents_built": runner.factory.built if isinstance(runner.factory, AgentFactory) else 0,
        "sessions": db.count_sessions(),
        "db_messages": db.count_messages(),
        "commits": commits,
        "writes": writes,
        "rss": rss_mb(),
        "load": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    await app.stop()  # the runner closes the model client, and with it `http_client`
    if served is not None:
        await served.cleanup()
    return result


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    what = (
        "the model answers in-process, at once"
        if r["mode"] == "instant"
        else "real client, a model server over HTTP on 127.0.0.1"
    )
    delivery = "inbox/outbox on" if r["delivery"] else "inbox/outbox OFF (bench baseline)"
    if r["traced"]:
        delivery += ", traces and metrics exported over OTLP"
    print(
        f"\n== {r['mode']}, {delivery}: {what}; {args.chats:,} chats x {r['messages']} messages per phase; "
        f"mirrors {'on' if args.mirrors else 'off'}"
    )
    o, c = r["open"], r["closed"]
    print(
        f"   open loop at {r['rate_offered']:,.0f} msg/s offered: {o['answered']:,}/{o['messages']:,} answered in "
        f"{o['wall']:.1f} s ({o['rate']:,.0f} msg/s), bad replies {o['bad']}"
    )
    print(
        f"      latency p50 {o['p50']:.1f} ms, p99 {o['p99']:.1f} ms; "
        f"time added by the gateway p50 {o['added_p50']:.1f} ms, p99 {o['added_p99']:.1f} ms"
    )
    print(
        f"      intake (arrival until the adapter may acknowledge) p50 {o['ack_p50']:.2f} ms, p99 {o['ack_p99']:.2f} ms"
    )
    print(
        f"      leaving out each chat's first message (its session is created then): "
        f"added p50 {o['later_p50']:.1f} ms, p99 {o['later_p99']:.1f} ms"
    )
    print(
        f"   closed loop (all chats at once): {c['messages']:,} messages in {c['wall']:.1f} s -> "
        f"{c['rate']:,.0f} msg/s (latency p50 {c['p50']:.0f} ms, p99 {c['p99']:.0f} ms: "
        f"{args.chats:,} messages always in flight), bad replies {c['bad']}"
    )
    print(
        f"   store raw append rate, same DB, same run: {r['raw_concurrent']:,.0f} msg/s concurrent "
        f"(group commit), {r['raw_sequential']:,.0f} msg/s one at a time"
    )
    print(
        f"   DB: {r['sessions']:,} sessions ({args.known:,} pre-created), {r['db_messages']:,} messages, "
        f"{r['writes']:,} writes in {r['commits']:,} commits ({r['writes'] / max(1, r['commits']):.1f} per commit)"
    )
    print(
        f"   agent cache: {r['cache']} held (bound {args.cache}), {r['evictions']:,} evictions, "
        f"{r['agents_built']:,} agents built"
    )
    print(f"   peak RSS of the process so far: {r['rss']:.0f} MB")
    cpu = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(r["cpu"].items(), key=lambda kv: -kv[1]))
    print(f"   garbage collector during the phases: {r['gc']}")
    print(f"   CPU by thread over both phases ({2 * r['open']['messages']:,} messages): {cpu}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--known", type=int, default=10_000)
    parser.add_argument("--cache", type=int, default=64)
    parser.add_argument("--mode", choices=("instant", "http", "both"), default="both")
    parser.add_argument("--rate", type=float, default=1000.0, help="offered load of the open-loop phase")
    parser.add_argument("--http-rate", type=float, default=100.0, help="offered load, http mode")
    parser.add_argument("--http-messages", type=int, default=3, help="messages per chat and phase, http mode")
    parser.add_argument(
        "--delivery",
        choices=("on", "off", "both"),
        default="both",
        help="inbox/outbox on (production), off (the bench's baseline), or both side by side",
    )
    parser.add_argument(
        "--telemetry",
        choices=("off", "on", "both"),
        default="off",
        help="export traces and metrics over OTLP to a local sink (bench/otlp_sink.py): off, on, or both "
        "side by side (with inbox/outbox on)",
    )
    parser.add_argument(
        "--no-mirrors",
        dest="mirrors",
        action="store_false",
        help="leave out the JSONL/sessions.json mirrors (to see their share)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"gateway bench: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load} "
        "(other processes share these CPUs); targets: >= 1,000 msg/s, p99 added <= 20 ms, RSS <= 300 MB"
    )
    modes = ["instant", "http"] if args.mode == "both" else [args.mode]
    deliveries = {"on": [True], "off": [False], "both": [False, True]}[args.delivery]
    traced = {"on": [True], "off": [False], "both": [False, True]}[args.telemetry]
    sink = Sink() if True in traced else None
    try:
        with tempfile.TemporaryDirectory(prefix="chinwag-bench-") as tmp:
            for mode in modes:
                runs = {}
                for delivery in deliveries:
                    for on in traced if delivery else [False]:
                        otlp = sink.url if sink is not None and on else ""
                        runs[delivery, on] = await run_mode(mode, args, Path(tmp), delivery, otlp)
                        report(runs[delivery, on], args)
                if (True, False) in runs and (False, False) in runs:
                    compare(runs[True, False], runs[False, False])
                if (True, True) in runs and (True, False) in runs:
                    compare_telemetry(runs[True, True], runs[True, False])
    finally:
        if sink is not None:
            sink.close()


def compare(on: dict[str, Any], off: dict[str, Any]) -> None:
    """The cost of delivery: the production run beside the baseline, as ratios and absolutes."""
    print(
        f"\n== {on['mode']}: inbox/outbox on vs off (load average during the runs: on {on['load']}, off {off['load']})"
    )
    throughput = on["closed"]["rate"] / off["closed"]["rate"]
    print(
        f"   throughput, closed loop: on {on['closed']['rate']:,.0f} msg/s, off {off['closed']['rate']:,.0f} msg/s "
        f"-> {throughput:.2f}x (target >= 0.8x)"
    )
    print(
        f"   open loop at {on['rate_offered']:,.0f} msg/s offered: answered at on {on['open']['rate']:,.0f}, "
        f"off {off['open']['rate']:,.0f} msg/s -> {on['open']['rate'] / off['open']['rate']:.2f}x"
    )
    o, f = on["open"], off["open"]
    print(
        f"   time added p99: on {o['added_p99']:.1f} ms, off {f['added_p99']:.1f} ms "
        f"({o['added_p99'] / max(f['added_p99'], 1e-9):.2f}x, {o['added_p99'] - f['added_p99']:+.1f} ms; "
        f"target on <= 20 ms); p50 on {o['added_p50']:.1f} ms, off {f['added_p50']:.1f} ms"
    )
    print(
        f"   intake p99 (what a webhook's 2xx waits for): on {o['ack_p99']:.2f} ms, off {f['ack_p99']:.2f} ms; "
        f"commits on {on['commits']:,} for {on['writes']:,} writes, off {off['commits']:,} for {off['writes']:,}"
    )


def compare_telemetry(on: dict[str, Any], off: dict[str, Any]) -> None:
    """The cost of telemetry: exporting traces and metrics beside off (nothing imported), same run."""
    print(f"\n== {on['mode']}: telemetry on vs off (load average during the runs: on {on['load']}, off {off['load']})")
    print(
        f"   throughput, closed loop: on {on['closed']['rate']:,.0f} msg/s, off {off['closed']['rate']:,.0f} msg/s "
        f"-> {on['closed']['rate'] / off['closed']['rate']:.2f}x; p99 on {on['closed']['p99']:.0f} ms, "
        f"off {off['closed']['p99']:.0f} ms"
    )
    o, f = on["open"], off["open"]
    print(
        f"   open loop at {on['rate_offered']:,.0f} msg/s offered: answered at on {o['rate']:,.0f}, off {f['rate']:,.0f} "
        f"msg/s -> {o['rate'] / f['rate']:.2f}x; time added p99 on {o['added_p99']:.1f} ms, off {f['added_p99']:.1f} ms "
        f"({o['added_p99'] / max(f['added_p99'], 1e-9):.2f}x), p50 on {o['added_p50']:.1f} ms, off {f['added_p50']:.1f} ms"
    )
    main_on, main_off = on["cpu"].get("MainThread", 0.0), off["cpu"].get("MainThread", 0.0)
    messages = 2 * on["open"]["messages"]
    print(
        f"   main thread CPU per message: on {main_on / messages * 1000:.2f} ms, off {main_off / messages * 1000:.2f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
