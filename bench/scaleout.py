"""Scale-out on Postgres (issue 17): messages/s for 1, 2 and 3 replicas in one run, and failover.

    PYTHONPATH=. python bench/scaleout.py --chats 200 --per-chat 2
    PYTHONPATH=. python bench/scaleout.py --search-sizes 0    # without the search section (~6 min less)

Starts a private PostgreSQL (tests/storage/postgres/server.py, fsync on), the Telegram fake and an
instant model (tests/fakes: the echo reply, no delay) in this process, then for each replica count
a fresh database and that many real `chinwag run` processes in webhook mode. Updates are posted
round-robin over the replicas, as a balancer spreads them; each chat sends its next update once
the previous one is acknowledged (as Telegram does). Throughput is the number of updates over the
seconds from the first post to the last answer. Many chats with few updates each: the Telegram
adapter paces a private chat at one message a second (Telegram's flood limit), so one chat's
updates measure that pacing, not the gateway.

Failover: with 2 replicas, the one holding the most chats gets a burst of updates for those chats
and is SIGKILLed (or SIGSTOPped) as soon as they are acknowledged; the figure is the seconds from
the signal to the last of them answered by the survivor (target of issue 17: <= 5 s). The SIGKILL
case is the next lease poll (the dead replica's lock goes with its socket); the SIGSTOP case is
idle_session_timeout or the lease's expiry, whichever comes first (see
gateway/storage/postgres/replicas.py for the figures chosen).

Everything runs on this machine's cores: the replicas, Postgres, and this process (fake platform,
fake model, posters), so the figures are the gateway's share of a small box, not a ceiling.
Last, search p50/p99 at 100k and 1M messages on Postgres beside SQLite (bench/postgres.py's
measurement, `search_section` below).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aiohttp
import psycopg

from bench import postgres as postgres_bench
from tests.fakes.daemon import Daemon
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.storage.postgres.server import PrivatePostgres

SECRET = "bench-secret"
WEBHOOK = "/webhooks/telegram"


def replica(tmp: Path, n: int, llm: FakeOpenAI, tg: FakeTelegram, dsn: str | None) -> Daemon:
    """A `chinwag run` on Postgres at `dsn` (None: on its home's SQLite, the one-process baseline)."""

    def platforms(port: int) -> dict[str, Any]:
        return {
            "telegram": {
                "token": tg.token,
                "base_url": tg.base_url,
                "mode": "webhook",
                "webhook_url": f"http://127.0.0.1:{port}{WEBHOOK}",
                "secret_token": SECRET,
                "allowed_users": ["*"],
            }
        }

    storage = {"backend": "postgres", "postgres": {"dsn": dsn}} if dsn else None
    return Daemon(tmp / f"replica{n}", llm, platforms, storage=storage)


def beating(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        try:
            return int(
                conn.execute(
                    "SELECT count(*) FROM replicas WHERE stopped_at IS NULL "
                    "AND seen_at > extract(epoch FROM clock_timestamp()) - 1"
                ).fetchone()[0]
            )
        except psycopg.errors.UndefinedTable:
            return 0


async def wait_for(predicate: Any, timeout: float, poll: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(poll)


async def post_until_acked(http: aiohttp.ClientSession, daemons: list[Daemon], first: int, update: dict) -> None:
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
    body = json.dumps(update).encode()
    attempt = first
    while True:
        daemon = daemons[attempt % len(daemons)]
        attempt += 1
        try:
            async with http.post(daemon.url(WEBHOOK), data=body, headers=headers) as resp:
                if 200 <= resp.status < 300:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.02)


class Traffic:
    """Updates for chats, and the count of their answers on the Telegram fake."""

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg
        self.next_post = 0

    def update(self, chat: int, n: int) -> tuple[dict, str]:
        user = FakeTelegram.user(chat, f"U{chat}")
        text = f"c{chat} m{n}"
        update = {
            "update_id": self.tg.next_update_id,
            "message": self.tg.make_message(self.tg.private_chat(user), user, text),
        }
        self.tg.next_update_id += 1
        return update, "echo: " + text

    def answered(self, answers: set[str]) -> bool:
        sent = {m["text"] for m in self.tg.sent()}
        return answers <= sent

    async def chat(
        self, http: aiohttp.ClientSession, daemons: list[Daemon], chat: int, start: int, count: int
    ) -> list[str]:
        out = []
        for n in range(start, start + count):
            update, answer = self.update(chat, n)
            out.append(answer)
            self.next_post += 1
            await post_until_acked(http, daemons, self.next_post, update)
        return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def throughput(
    server: PrivatePostgres, tmp: Path, replicas: int, args: argparse.Namespace, sqlite: bool = False
) -> dict[str, float]:
    dsn = None if sqlite else server.create_database(f"scale{replicas}")
    tg = await FakeTelegram().start()
    daemons: list[Daemon] = []
    try:
        async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            daemons = [
                replica(tmp / f"{'sqlite' if sqlite else 'n'}{replicas}", n, llm, tg, dsn) for n in range(replicas)
            ]
            for daemon in daemons:
                await daemon.start()
            if dsn is not None:
                await wait_for(lambda: beating(dsn) == replicas, 90, poll=0.2)
            traffic = Traffic(tg)
            warm, _ = traffic.update(1, 0)  # one turn first: every replica has its imports warm
            await post_until_acked(http, daemons, 0, warm)
            await wait_for(lambda: traffic.answered({"echo: c1 m0"}), 30)
            pids = [d.proc.pid for d in daemons if d.proc is not None]
            cpu_before = [cpu_seconds(pid) for pid in pids]
            own_before = time.process_time()
            started = time.perf_counter()
            lists = await asyncio.gather(
                *(traffic.chat(http, daemons, 100 + c, 0, args.per_chat) for c in range(args.chats))
            )
            wanted = {a for answers in lists for a in answers}
            await wait_for(lambda: traffic.answered(wanted), 300, poll=0.05)
            seconds = time.perf_counter() - started
            replica_cpu = sum(cpu_seconds(pid) - before for pid, before in zip(pids, cpu_before))
            return {
                "rate": len(wanted) / seconds,
                "replica_cpu": replica_cpu / seconds,  # cores busy in the replicas
                "bench_cpu": (time.process_time() - own_before) / seconds,  # in the fakes and posters
            }
    finally:
        for daemon in daemons:
            await daemon.terminate()
        await tg.stop()


async def failover(
    server: PrivatePostgres, tmp: Path, sig: signal.Signals, args: argparse.Namespace
) -> tuple[float, float]:
    """Seconds from `sig` to every one of the victim's chats answered again (its first waiting
    update), and to all of their acknowledged updates answered (the rest wait for Telegram's one
    message a second per chat)."""
    dsn = server.create_database(f"fail{sig.name.lower()}")
    tg = await FakeTelegram().start()
    daemons: list[Daemon] = []
    try:
        async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            daemons = [replica(tmp / f"f{sig.name}", n, llm, tg, dsn) for n in range(2)]
            for daemon in daemons:
                await daemon.start()
            await wait_for(lambda: beating(dsn) == 2, 90, poll=0.2)
            traffic = Traffic(tg)
            chats = list(range(500, 500 + args.failover_chats))
            firsts = await asyncio.gather(*(traffic.chat(http, daemons, c, 0, 1) for c in chats))
            await wait_for(lambda: traffic.answered({a for f in firsts for a in f}), 60)
            with psycopg.connect(dsn) as conn:
                rows = conn.execute(
                    "SELECT r.pid, l.chat_key FROM chat_leases l JOIN replicas r ON r.id = l.replica_id"
                ).fetchall()
            by_pid: dict[int, list[int]] = {}
            for pid, key in rows:
                chat = next(c for c in chats if f"{c}" in key)
                by_pid.setdefault(pid, []).append(chat)
            victim = max(daemons, key=lambda d: len(by_pid.get(d.proc.pid if d.proc else 0, [])))
            assert victim.proc is not None
            held = by_pid.get(victim.proc.pid, [])
            # a burst to the victim itself for its own chats: acknowledged there, not yet answered
            llm.gate = asyncio.Event()
            burst = await asyncio.gather(*(traffic.chat(http, [victim], c, 1, 2) for c in held))
            victim.signal(sig)
            stopped = time.perf_counter()
            llm.gate.set()
            llm.gate = None
            firsts_after = {answers[0] for answers in burst}
            await wait_for(lambda: traffic.answered(firsts_after), 60, poll=0.01)
            again = time.perf_counter() - stopped
            wanted = {a for answers in burst for a in answers}
            await wait_for(lambda: traffic.answered(wanted), 60)
            seconds = time.perf_counter() - stopped
            if sig == signal.SIGSTOP:
                victim.signal(signal.SIGCONT)
            print(f"  {sig.name}: {len(held)} chats, {len(wanted)} acknowledged updates", flush=True)
            return again, seconds
    finally:
        for daemon in daemons:
            if daemon.proc is not None and daemon.proc.returncode is None:
                await daemon.terminate()
        await tg.stop()


def search_section(args: argparse.Namespace) -> None:
    """Search p50/p99 on Postgres beside SQLite at --search-sizes, in this same run: bench/postgres.py's
    measurement (its docstring says what is timed), on a production-sized server of its own."""
    sizes = [int(x) for x in args.search_sizes.split(",") if x.strip() and int(x) > 0]
    if sizes:
        print(f"\nsearch on Postgres beside SQLite, {', '.join(f'{n:,}' for n in sizes)} messages", flush=True)
        postgres_bench.run(sizes, args.search_rounds)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--per-chat", type=int, default=2)
    parser.add_argument("--replicas", default="1,2,3", help="replica counts to measure")
    parser.add_argument("--failover-chats", type=int, default=20)
    parser.add_argument("--no-fsync", action="store_true", help="Postgres with fsync off (what commits cost)")
    parser.add_argument(
        "--search-sizes",
        default="100000,1000000",
        help="store sizes for the search section (0: skip it; 1M loads in ~5 min)",
    )
    parser.add_argument("--search-rounds", type=int, default=100, help="queries timed per shape and backend")
    args = parser.parse_args()
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # replicas killed mid-request, on purpose
    with (
        tempfile.TemporaryDirectory(prefix="chinwag-scale-") as tmp_name,
        PrivatePostgres(durable=not args.no_fsync) as server,
    ):
        tmp = Path(tmp_name)
        print(f"=== {args.chats} chats x {args.per_chat} updates, instant model, {os.cpu_count()} cores ===")
        runs = [("sqlite, 1 process", 1, True)] + [
            (f"postgres, {n} replica{'s' if n > 1 else ''}", n, False)
            for n in [int(x) for x in args.replicas.split(",")]
        ]
        for label, n, sqlite in runs:
            r = await throughput(server, tmp, n, args, sqlite=sqlite)
            print(
                f"  {label:22} {r['rate']:7.1f} messages/s   cores busy: gateway {r['replica_cpu']:.2f}, "
                f"this process (fake platform, model, posters) {r['bench_cpu']:.2f}",
                flush=True,
            )
        print("\nfailover: the busiest of 2 replicas stopped with updates acknowledged and unanswered")
        for sig in (signal.SIGKILL, signal.SIGSTOP):
            again, seconds = await failover(server, tmp, sig, args)
            print(
                f"  {sig.name}: every chat answered again {again:.2f}s after the signal (target <= 5 s), "
                f"every update {seconds:.2f}s",
                flush=True,
            )
    search_section(args)


if __name__ == "__main__":
    asyncio.run(main())
