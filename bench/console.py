"""Console benchmark: list-page and search latency through the real ops server at scale.

Builds a store of N sessions (default 100k, 10 messages each: 1M messages) with the import path,
serves the console on 127.0.0.1, and times real HTTP requests (HTML pages and the JSON API):

- the sessions list: first page, a page deep in the list (keyset cursor), and with each filter;
- the baseline in the same run: the same deep page read with OFFSET (SessionDB.list_sessions_rich,
  the CLI's listing), the way a naive console would page, timed directly on the DB;
- search: the console's /api/v1/search against recall's find_sessions called directly (what
  `chinwag sessions search` runs), for the target "console <= CLI + 20 ms".

    python bench/console.py                       # 100k sessions / 1M messages
    python bench/console.py --sessions 20000 --per-session 5
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.stats import percentile
from gateway.db import SessionDB
from gateway.recall import find_sessions
from gateway.service.http import OpsServer
from gateway.storage.media import MediaStore

WORDS = (
    "deploy gateway timeout nginx docker rollback webhook config retry cache token proxy build test "
    "release branch merge error log metric alert queue worker schedule backup restore database index "
    "query latency memory disk network socket thread lock commit schema migration version"
).split()
HAN = "部署网关超时配置重试缓存代理构建测试发布分支合并错误日志监控告警队列数据库索引查询延迟内存磁盘网络"
SOURCES = ("telegram", "feishu", "discord", "local")


def build(path: Path, sessions: int, per_session: int, seed: int = 7) -> float:
    rng = random.Random(seed)
    db = SessionDB(path)
    started = time.perf_counter()
    now = time.time()
    batch: list[dict] = []
    for i in range(sessions):
        t0 = now - 365 * 86400 + i * (365 * 86400 / sessions)
        user = f"u{rng.randrange(2000)}" if i % 100 else "rare-person"
        session = {
            "id": f"{time.strftime('%Y%m%d_%H%M%S', time.gmtime(t0))}_{i:08x}",
            "source": SOURCES[i % 4],
            "user_id": user,
            "user_name": user.upper(),
            "started_at": t0,
            "title": f"session {i} about {rng.choice(WORDS)}" if i % 3 == 0 else None,
        }
        messages = []
        for m in range(per_session):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18)))
            if m % 4 == 1:
                text += " " + "".join(rng.choice(HAN) for _ in range(6))
            if i % 5000 == 17 and m == 0:
                text += " the quokka-77 incident"
            messages.append(
                {
                    "role": "user" if m % 2 == 0 else "assistant",
                    "content": text,
                    "timestamp": t0 + 30 * m,
                    "user_id": user if m % 2 == 0 else None,
                }
            )
        batch.append({"session": session, "messages": messages})
        if len(batch) == 2000:
            db.import_records(batch)
            batch = []
    if batch:
        db.import_records(batch)
    db.close()
    return time.perf_counter() - started


def summary(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples) * 1000, percentile(samples, 0.99) * 1000


async def timed_get(http: aiohttp.ClientSession, url: str, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        async with http.get(url) as resp:
            await resp.read()
            assert resp.status == 200, (url, resp.status)
        samples.append(time.perf_counter() - t)
    return samples


def timed_call(fn, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return samples


async def run(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="chinwag-bench-console-"))
    path = work / "state.db"
    seconds = build(path, args.sessions, args.per_session)
    print(f"store: {args.sessions:,} sessions, {args.sessions * args.per_session:,} messages, built in {seconds:.0f} s")
    db = SessionDB(path)
    server = OpsServer("127.0.0.1", 0, db=db, media=MediaStore(work / "media"))
    await server.start()
    runs = args.runs
    deep = args.sessions // 2
    async with aiohttp.ClientSession(base_url=server.url) as http:
        async with http.get("/api/v1/sessions?limit=200") as resp:
            cursor = (await resp.json())["next"]
        # walk to the middle of the list with the API's own cursors, 200 rows a page
        for _ in range(deep // 200 - 1):
            async with http.get("/api/v1/sessions", params={"limit": 200, "after": cursor}) as resp:
                cursor = (await resp.json())["next"]
        cases = {
            "list page 1 (HTML)": "/console/",
            f"list page at row {deep:,} (HTML)": f"/console/?after={quote(cursor)}",
            "list page 1 (JSON)": "/api/v1/sessions",
            f"list page at row {deep:,} (JSON)": f"/api/v1/sessions?after={quote(cursor)}",
            "filter platform=feishu": "/console/?platform=feishu",
            "filter user (common person)": "/console/?user=u42",
            "filter user (rare person)": "/console/?user=rare-person",
            "filter titled=0": "/console/?titled=0",
            "filter a one-month range": "/console/?from="
            + time.strftime("%Y-%m-01", time.gmtime(time.time() - 200 * 86400))
            + "&to="
            + time.strftime("%Y-%m-28", time.gmtime(time.time() - 200 * 86400)),
        }
        print(f"\n{'console request':42} {'p50 ms':>8} {'p99 ms':>8}")
        results = {}
        for label, url in cases.items():
            await timed_get(http, url, 3)  # warm
            p50, p99 = summary(await timed_get(http, url, runs))
            results[label] = (p50, p99)
            print(f"{label:42} {p50:8.1f} {p99:8.1f}")
        baseline = summary(timed_call(lambda: db.list_sessions_rich(limit=50, offset=deep), runs))
        keyset = summary(
            timed_call(lambda: db.list_sessions_page(after=(float(cursor.split("~")[0]), cursor.split("~")[1])), runs)
        )
        print(f"\n{'baseline (same run, DB only)':42} {'p50 ms':>8} {'p99 ms':>8}")
        print(f"{f'OFFSET {deep:,} page (list_sessions_rich)':42} {baseline[0]:8.1f} {baseline[1]:8.1f}")
        print(f"{f'keyset page at row {deep:,}':42} {keyset[0]:8.1f} {keyset[1]:8.1f}")
        print(f"ratio OFFSET / keyset at row {deep:,}: {baseline[0] / max(keyset[0], 1e-6):.1f}x (p50)")
        deep_html = results[f"list page at row {deep:,} (HTML)"]
        print(f"ratio deep HTML page / OFFSET DB read: {deep_html[0] / max(baseline[0], 1e-6):.2f}x (p50)")

        print(f"\n{'search':42} {'console p50':>11} {'p99':>7} {'CLI p50':>8} {'p99':>7}")
        for q in ("quokka-77", "nginx timeout", "部署网关", "deploy rollback webhook"):
            await timed_get(http, f"/api/v1/search?q={quote(q)}", 2)
            console = summary(await timed_get(http, f"/api/v1/search?q={quote(q)}", max(5, runs // 4)))
            cli = summary(timed_call(lambda: find_sessions(db, q, see_all=True), max(5, runs // 4)))
            verdict = "ok" if console[1] <= cli[1] + 20 else "OVER"
            print(
                f"{q:42} {console[0]:11.1f} {console[1]:7.1f} {cli[0]:8.1f} {cli[1]:7.1f}  {verdict} (<= CLI+20ms p99)"
            )
    await server.stop()
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--runs", type=int, default=100)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
