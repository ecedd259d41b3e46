"""Store benchmark: durable append rate, bytes per message and query latency, against a naive
baseline built the reference's way in the same run (one transaction per message; text indexed
twice inline — a word index and a trigram index over all content, kept by triggers).

    python bench/store.py                 # 100k messages
    python bench/store.py --sizes 100000 1000000 --naive-max 200000
    python bench/store.py --sizes --list-sessions 0 --appends 100000 --naive-appends 10000 --fresh 20000

Loading a store for the query figures (`--sizes`) goes through the same write ops as every append
(gateway/storage/rows.py `op_append`, checked and indexed as usual), 5,000 to a transaction: 1M messages load
in minutes instead of the hour one commit per 256 would take. Sizes above `--naive-max` skip the
naive baseline (its trigram index over all text alone is ~4 KB a message).

The write path (`--appends`): one chat appending one message at a time (each waits for its commit)
and 100 chats at once, each beside the naive baseline in the same run, in interleaved rounds (ours,
then naive, `--rounds-writes` times; for 100 chats, the naive burst between ours' two halves) so
both see the same disk: the disk is shared and an fsync
costs 0.3 to 3 ms depending on what else runs. Printed: appends/s, CPU per append (the process's
CPU time: what contention does not change), the WAL file's peak and its size after 5 s idle, WAL
bytes written per message (read from the wal-index header: frames appended) and DB bytes per
message. `--naive-appends` caps the baseline's count (it runs at a few hundred a second); rates are
per second, so the ratio stays like for like. `--fresh`: a 2-character Chinese query on a store
measured right after its ingest, before any optimize.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import PLANTED, generate
from bench.stats import percentile
from gateway.db import SessionDB
from gateway.storage.rows import op_append, op_create_session
from gateway.storage.writer import WalFile

QUERIES = {
    "word": ["docker", "timeout", "rollback", "webhook", "quokka"],
    "phrase": ['"restart the agent"', '"docker compose"', '"feature flag"'],
    "identifier": ["ERR_004211", "nginx.conf", "--onefile", "node-17.corp.example.net"],
    "email": ["alice.wong@example.org"],
    "url": ["https://wiki.example.com/runbooks/pager-rotation", "https://docs.example.com/guide/setup"],
    "zh 2-char word": ["部署", "机房", "钢琴", "松兰"],
    "zh word AND en word": ["松兰 机房", "部署 docker", "网关 timeout"],
    "empty result": ["xylophonic", "不存在词"],
}
CJK = re.compile("[\u4e00-\u9fff]")


# --- the naive baseline -------------------------------------------------------------------------
NAIVE_SCHEMA = """
PRAGMA journal_mode = WAL;
CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL, title TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, role TEXT, content TEXT,
    tool_calls TEXT, timestamp REAL, active INTEGER DEFAULT 1);
CREATE INDEX idx_m_session ON messages(session_id);
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id');
CREATE VIRTUAL TABLE messages_tri USING fts5(content, content='messages', content_rowid='id', tokenize='trigram');
CREATE TRIGGER m_ai AFTER INSERT ON messages BEGIN
  INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
  INSERT INTO messages_tri(rowid, content) VALUES (new.id, new.content);
END;
"""


def naive_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA busy_timeout = 60000")
    return conn


def naive_append(conn: sqlite3.Connection, sid: str, role: str, content: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
        (sid, role, content, time.time()),
    )
    conn.execute("COMMIT")


def naive_search(conn: sqlite3.Connection, query: str) -> list:
    """The reference's behaviour: LIKE scan for Chinese, raw MATCH otherwise (errors -> nothing)."""
    if CJK.search(query):
        terms = query.split()
        where = " OR ".join("content LIKE ?" for _ in terms)
        return conn.execute(
            f"SELECT id FROM messages WHERE {where} ORDER BY timestamp DESC LIMIT 20", [f"%{t}%" for t in terms]
        ).fetchall()
    try:
        rows = conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20", (query,)
        ).fetchall()
    except sqlite3.OperationalError:
        rows = []
    if not rows and re.search(r"[^\w\s]", query):
        try:
            rows = conn.execute(
                "SELECT rowid FROM messages_tri WHERE messages_tri MATCH ? ORDER BY rank LIMIT 20",
                ('"' + query.replace('"', '""') + '"',),
            ).fetchall()
        except sqlite3.OperationalError:
            rows = []
    return rows


# --- loading ----------------------------------------------------------------------------------
def corpus_with_facts(n: int) -> list:
    messages = list(generate(n))
    rng = random.Random(99)
    for i, text in enumerate(PLANTED.values()):
        at = rng.randrange(len(messages))
        messages[at].content = text
        messages[at].role = "user"
    return messages


LOAD_BATCH = 5000  # messages per transaction when loading a store for the query figures


def write_all(db: SessionDB, ops: list) -> None:
    """Run `ops` in one transaction of the writer."""

    def op(conn: sqlite3.Connection, events: list) -> None:
        for each in ops:
            each(conn, events)

    db.write(op)


def bulk_append(db: SessionDB, messages: list) -> None:
    """Append `messages` through the ordinary write op, LOAD_BATCH to a transaction."""
    for start in range(0, len(messages), LOAD_BATCH):
        part = messages[start : start + LOAD_BATCH]
        write_all(db, [op_append(db.dialect, f"s{m.session:07d}", m.role, m.content, {}) for m in part])


def load_ours(path: str, messages: list) -> SessionDB:
    db = SessionDB(path)
    sessions = sorted({m.session for m in messages})
    for start in range(0, len(sessions), LOAD_BATCH):
        part = sessions[start : start + LOAD_BATCH]
        write_all(db, [op_create_session(f"s{s:07d}", "telegram", {"user_id": f"u{s % 500}"}) for s in part])
    bulk_append(db, messages)
    db.optimize()
    return db


def load_naive(path: str, messages: list) -> sqlite3.Connection:
    conn = naive_connect(path)
    conn.executescript(NAIVE_SCHEMA)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO sessions VALUES (?, 'telegram', ?, NULL)",
        [(f"s{s:07d}", time.time()) for s in sorted({m.session for m in messages})],
    )
    conn.execute("COMMIT")
    for start in range(0, len(messages), 20000):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            [(f"s{m.session:07d}", m.role, m.content, time.time()) for m in messages[start : start + 20000]],
        )
        conn.execute("COMMIT")
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
    conn.execute("INSERT INTO messages_tri(messages_tri) VALUES ('optimize')")
    return conn


# --- measurements -----------------------------------------------------------------------------
def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds else float("inf")


def ours_appends(db: SessionDB) -> tuple[float, float]:
    db.create_session("bench_one", "local")
    t = time.perf_counter()
    for i in range(300):
        db.append_message("bench_one", "user", f"durable append number {i} with some words docker timeout")
    one = rate(300, time.perf_counter() - t)

    async def many() -> float:
        await asyncio.gather(*(db.acreate_session(f"bench_c{c}", "telegram") for c in range(100)))

        async def chat(c: int) -> None:
            for i in range(20):
                await db.aappend_message(f"bench_c{c}", "user", f"chat {c} message {i} about deploy and retry")

        t0 = time.perf_counter()
        await asyncio.gather(*(chat(c) for c in range(100)))
        return rate(2000, time.perf_counter() - t0)

    return one, asyncio.run(many())


def naive_appends(path: str) -> tuple[float, float]:
    conn = naive_connect(path)
    t = time.perf_counter()
    for i in range(300):
        naive_append(conn, "bench_one", "user", f"durable append number {i} with some words docker timeout")
    one = rate(300, time.perf_counter() - t)
    conn.close()

    def chat(c: int) -> None:
        own = naive_connect(path)
        for i in range(10):
            naive_append(own, f"bench_c{c}", "user", f"chat {c} message {i} about deploy and retry")
        own.close()

    threads = [threading.Thread(target=chat, args=(c,)) for c in range(100)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return one, rate(1000, time.perf_counter() - t)


def latencies(run, queries: list[str], rounds: int, cpu: list[float] | None = None) -> tuple[float, float, int]:
    """(p50, p99, empty results) of wall time in ms; with `cpu`, the p99 of this thread's CPU time
    is appended to it (what the query itself costs, whatever else the machine runs)."""
    for q in queries:  # warm the cache
        run(q)
    samples, cpu_samples, empty = [], [], 0
    for r in range(rounds):
        q = queries[r % len(queries)]
        t, c = time.perf_counter(), time.thread_time()
        rows = run(q)
        samples.append((time.perf_counter() - t) * 1000)
        cpu_samples.append((time.thread_time() - c) * 1000)
        empty += not rows
    if cpu is not None:
        cpu.append(percentile(cpu_samples, 0.99))
    return statistics.median(samples), percentile(samples, 0.99), empty


def file_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def bench_size(n: int, workdir: str, rounds: int, naive_rounds: int, with_naive: bool = True) -> None:
    print(f"\n=== {n:,} messages ===", flush=True)
    ours_path, naive_path = os.path.join(workdir, f"ours_{n}.db"), os.path.join(workdir, f"naive_{n}.db")
    naive: sqlite3.Connection | None = None
    if os.path.exists(ours_path) and (os.path.exists(naive_path) or not with_naive):  # --workdir of an earlier run
        print("reusing the databases of an earlier run in this directory", flush=True)
        db = SessionDB(ours_path)
        naive = naive_connect(naive_path) if with_naive else None
    else:
        fresh(ours_path)
        messages = corpus_with_facts(n)
        text_bytes = sum(len(m.content.encode()) for m in messages)
        print(f"corpus: {text_bytes / n:.0f} bytes of text per message on average", flush=True)
        t = time.perf_counter()
        db = load_ours(ours_path, messages)
        print(
            f"load ours: {time.perf_counter() - t:.1f}s ({rate(n, time.perf_counter() - t):,.0f} msg/s, "
            f"the append op {LOAD_BATCH:,} to a transaction, then optimize)",
            flush=True,
        )
        if with_naive:
            fresh(naive_path)
            t = time.perf_counter()
            naive = load_naive(naive_path, messages)
            print(f"load naive: {time.perf_counter() - t:.1f}s (bulk transactions)", flush=True)
        else:
            print("naive baseline skipped at this size (--naive-max)", flush=True)
        del messages

    db.read(lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
    ours_b = file_bytes(ours_path) / n
    if naive is not None:
        naive.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        naive_b = file_bytes(naive_path) / n
        print(
            f"\nbytes per message: ours {ours_b:,.0f}  naive {naive_b:,.0f}  ratio {ours_b / naive_b:.2f}  "
            f"(reference: ~3,000 at 100k)"
        )
    else:
        print(f"\nbytes per message: ours {ours_b:,.0f}")
    parts = db.stats().get("bytes_by_part")
    if parts:
        print("  ours by part: " + ", ".join(f"{k} {v / n:,.0f} B/msg" for k, v in sorted(parts.items())))

    o1, o100 = ours_appends(db)
    commits, writes = db.commit_stats
    if naive is not None:
        n1, n100 = naive_appends(naive_path)
        print("\ndurable appends/s        ours      naive     ratio")
        print(f"  one chat          {o1:9,.0f}  {n1:9,.0f}  {o1 / n1:6.2f}x")
        print(f"  100 chats at once {o100:9,.0f}  {n100:9,.0f}  {o100 / n100:6.2f}x")
    else:
        print(f"\ndurable appends/s into the {n:,}-message store: one chat {o1:,.0f}, 100 chats at once {o100:,.0f}")
    print(f"  ours group commit: {writes:,} writes in {commits:,} commits")

    print(f"\nquery latency ms (ours: {rounds} runs/shape; naive: {naive_rounds})")
    print(
        f"  {'shape':22} {'ours p50':>9} {'ours p99':>9} {'CPU p99':>8} {'naive p50':>10} {'naive p99':>10} "
        f"{'p99 ratio':>9}  empty ours/naive"
    )
    reader = naive_connect(naive_path) if naive is not None else None
    worst = worst_cpu = 0.0
    for shape, queries in QUERIES.items():
        cpu: list[float] = []
        op50, op99, oempty = latencies(lambda q: db.search_messages(q, limit=20), queries, rounds, cpu)
        worst, worst_cpu = max(worst, op99), max(worst_cpu, cpu[0])
        if reader is not None:
            np50, np99, nempty = latencies(lambda q: naive_search(reader, q), queries, naive_rounds)
            theirs = f"{np50:10.2f} {np99:10.2f} {np99 / op99 if op99 else 0:8.1f}x  {oempty}/{rounds} {nempty}/{naive_rounds}"
        else:
            theirs = f"{'-':>10} {'-':>10} {'-':>9}  {oempty}/{rounds}"
        print(f"  {shape:22} {op50:9.2f} {op99:9.2f} {cpu[0]:8.2f} {theirs}", flush=True)

    sessions = db.count_sessions()
    for label, kwargs in (
        ("list_sessions_rich, newest 20", {}),
        ("… of one user", {"user_id": "u7"}),
        ("… of one source, page 10", {"source": "telegram", "offset": 200}),
    ):
        cpu = []
        p50, p99, _ = latencies(lambda q: db.list_sessions_rich(limit=20, **kwargs), ["-"], 50, cpu)
        worst, worst_cpu = max(worst, p99), max(worst_cpu, cpu[0])
        print(
            f"{label:32} over {sessions:,} sessions: p50 {p50:.2f} ms  p99 {p99:.2f} ms  CPU p99 {cpu[0]:.2f} ms  "
            "(reference: ~48 ms at 2,000)"
        )
    print(
        f"worst p99 of any shape at {n:,}: {worst:.2f} ms wall, {worst_cpu:.2f} ms CPU (target <= 30 ms; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )

    found_ours = found_naive = 0
    for needle, text in PLANTED.items():
        ids = {h["id"] for h in db.search_messages(needle, limit=5)}
        target = db.read(lambda c: c.execute("SELECT id FROM messages WHERE content = ?", (text,)).fetchone()[0])
        found_ours += target in ids
        if reader is not None:
            found_naive += target in {r[0] for r in naive_search(reader, needle)[:5]}
    theirs = f"  naive {found_naive}/{len(PLANTED)}" if reader is not None else ""
    print(f"\nplanted facts found in top 5: ours {found_ours}/{len(PLANTED)}{theirs}")
    db.close()
    if reader is not None and naive is not None:
        reader.close()
        naive.close()


# --- the write path ---------------------------------------------------------------------------
class WalWatch:
    """Samples the -wal file's size (peak) from a thread, and counts the frames a connection
    appends around each of its commits (sequential writers only)."""

    def __init__(self, path: str, page_size: int) -> None:
        self.wal, self.frame = WalFile(path, page_size), page_size + 24
        self.peak, self.frames_bytes = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.wal.file_bytes())

    def around(self, fn, *args) -> bool:
        """Run fn(*args), counting the frames it appended; True (to be usable in an expression)."""
        before = self.wal.position()
        fn(*args)
        after = self.wal.position()
        if after is not None:
            added = after[0] if before is None or before[1] != after[1] else after[0] - before[0]
            self.frames_bytes += added * self.frame
        return True

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.wal.file_bytes())
        return self.peak


def fresh(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def write_texts(n: int) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in generate(n, seed=11)]


class Side:
    """One store of the write-path race: its time and CPU spent appending, and its WAL watch."""

    def __init__(self, path: str, page_size: int) -> None:
        self.path, self.seconds, self.cpu, self.appends = path, 0.0, 0.0, 0
        self.watch = WalWatch(path, page_size)

    def timed(self, appends: int, run) -> None:
        t, c = time.perf_counter(), time.process_time()
        run()
        self.seconds += time.perf_counter() - t
        self.cpu += time.process_time() - c
        self.appends += appends


def bench_writes(n: int, chats: int, workdir: str, naive_n: int, rounds: int) -> None:
    naive_n = min(naive_n or n, n)
    print(
        f"\n=== write path: {n:,} appends (naive: {naive_n:,}), one chat, then {chats} chats at once; "
        f"{rounds} interleaved rounds ===",
        flush=True,
    )
    texts = write_texts(n)
    rows: list[tuple] = []

    def share(total: int, r: int) -> range:
        return range(total * r // rounds, total * (r + 1) // rounds)

    # one chat: each append waits for its commit
    ours_path, naive_path = os.path.join(workdir, "writes_ours.db"), os.path.join(workdir, "writes_naive.db")
    fresh(ours_path)
    fresh(naive_path)
    db = SessionDB(ours_path)
    db.create_session("one", "local")
    conn = naive_connect(naive_path)
    conn.executescript(NAIVE_SCHEMA)
    ours, naive = Side(ours_path, db.read(page_size)), Side(naive_path, page_size(conn))
    written0 = db.wal_stats()["wal_written_bytes"]
    for r in range(rounds):
        ours_part, naive_part = share(n, r), share(naive_n, r)
        ours.timed(len(ours_part), lambda: [db.append_message("one", *texts[i]) for i in ours_part])
        naive.timed(
            len(naive_part), lambda: [naive.watch.around(naive_append, conn, "one", *texts[i]) for i in naive_part]
        )
    ours_written = db.wal_stats()["wal_written_bytes"] - written0
    time.sleep(5)
    rows.append(("ours", "one chat", ours, ours.watch.stop(), db.wal_bytes(), ours_written / n))
    rows.append(("naive", "one chat", naive, naive.watch.stop(), WalFile(naive_path, 0).file_bytes()))
    rows[-1] += (naive.watch.frames_bytes / naive_n,)
    db.close()
    conn.close()

    # many chats at once: ours on one event loop, the naive a thread and a connection each (as the reference)
    per_chat, naive_per_chat = max(1, n // chats), max(1, naive_n // chats)
    ours_path, naive_path = os.path.join(workdir, "writes_ours_many.db"), os.path.join(workdir, "writes_naive_many.db")
    fresh(ours_path)
    fresh(naive_path)
    db = SessionDB(ours_path)
    conn = naive_connect(naive_path)
    conn.executescript(NAIVE_SCHEMA)

    async def many(part: range) -> None:
        async def chat(c: int) -> None:
            for i in part:
                await db.aappend_message(f"c{c}", *texts[(c * per_chat + i) % n])

        await asyncio.gather(*(chat(c) for c in range(chats)))

    class NaiveChats:
        """A thread and a connection per chat, started once; each round releases them together."""

        def __init__(self) -> None:
            self.go = [threading.Semaphore(0) for _ in range(chats)]
            self.done = threading.Semaphore(0)
            self.part: range | None = range(0)
            self.threads = [threading.Thread(target=self.chat, args=(c,), daemon=True) for c in range(chats)]
            for th in self.threads:
                th.start()

        def chat(self, c: int) -> None:
            own = naive_connect(naive_path)
            while True:
                self.go[c].acquire()
                if self.part is None:
                    break
                for i in self.part:
                    naive_append(own, f"c{c}", *texts[(c * per_chat + i) % n])
                self.done.release()
            own.close()

        def round(self, part: range | None) -> None:
            self.part = part
            for go in self.go:
                go.release()
            if part is not None:
                for _ in range(chats):
                    self.done.acquire()

    naive_chats = NaiveChats()

    async def create() -> None:
        await asyncio.gather(*(db.acreate_session(f"c{c}", "telegram") for c in range(chats)))

    asyncio.run(create())
    ours, naive = Side(ours_path, db.read(page_size)), Side(naive_path, page_size(conn))
    written0 = db.wal_stats()["wal_written_bytes"]
    batches0 = db.commit_stats
    # The naive chats run in one burst between ours' two halves: cut into short rounds, 100 threads
    # spend most of each round in SQLite's busy back-off sleeps, which would flatter ours.
    half = per_chat // 2
    ours.timed(half * chats, lambda: asyncio.run(many(range(half))))
    naive.timed(naive_per_chat * chats, lambda: naive_chats.round(range(naive_per_chat)))
    ours.timed((per_chat - half) * chats, lambda: asyncio.run(many(range(half, per_chat))))
    naive_chats.round(None)
    commits, writes = (b - a for a, b in zip(batches0, db.commit_stats))
    ours_written = db.wal_stats()["wal_written_bytes"] - written0
    time.sleep(5)
    rows.append(("ours", f"{chats} chats", ours, ours.watch.stop(), db.wal_bytes(), ours_written / ours.appends))
    rows.append(("naive", f"{chats} chats", naive, naive.watch.stop(), WalFile(naive_path, 0).file_bytes(), None))
    db.close()
    conn.close()

    mb = 1024 * 1024
    print(
        f"  {'':6} {'':10} {'appends/s':>10} {'CPU/append':>11} {'WAL peak':>10} {'WAL idle 5s':>12} "
        f"{'WAL/msg':>10} {'DB/msg':>9}"
    )
    for who, what, side, peak, idle, wal_per in rows:
        per = f"{wal_per / 1024:8.1f} KB" if wal_per is not None else f"{'n/a':>11}"
        print(
            f"  {who:6} {what:10} {rate(side.appends, side.seconds):10,.0f} {side.cpu / side.appends * 1e6:8.0f} µs "
            f"{peak / mb:8.1f} MB {idle / mb:9.1f} MB {per} {file_bytes(side.path) / side.appends / 1024:6.1f} KB"
        )
    one = rate(rows[0][2].appends, rows[0][2].seconds) / rate(rows[1][2].appends, rows[1][2].seconds)
    lots = rate(rows[2][2].appends, rows[2][2].seconds) / rate(rows[3][2].appends, rows[3][2].seconds)
    print(
        f"  ratio ours/naive: one chat {one:.2f}x (target >= 1.5x), {chats} chats {lots:.2f}x (target >= 10x); "
        f"WAL/msg one chat {rows[0][5] / rows[1][5]:.2f}x; ours {chats} chats: {writes:,} writes in {commits:,} commits",
        flush=True,
    )


def page_size(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA page_size").fetchone()[0]


def bench_fresh_query(n: int, workdir: str, rounds: int) -> None:
    """A 2-character Chinese query on a store measured right after its ingest (no optimize)."""
    print(f"\n=== a 2-character Chinese query right after ingesting {n:,} messages ===", flush=True)
    messages = corpus_with_facts(n)
    ours_path, naive_path = os.path.join(workdir, f"fresh_ours_{n}.db"), os.path.join(workdir, f"fresh_naive_{n}.db")
    fresh(ours_path)
    fresh(naive_path)
    db = SessionDB(ours_path)
    sessions = sorted({m.session for m in messages})

    async def load() -> None:
        await asyncio.gather(*(db.acreate_session(f"s{s:07d}", "telegram") for s in sessions))
        for start in range(0, len(messages), 5000):
            await asyncio.gather(
                *(db.aappend_message(f"s{m.session:07d}", m.role, m.content) for m in messages[start : start + 5000])
            )

    asyncio.run(load())
    naive = naive_connect(naive_path)
    naive.executescript(NAIVE_SCHEMA)
    for m in messages:
        naive_append(naive, f"s{m.session:07d}", m.role, m.content)
    segments = db.read(lambda c: c.execute("SELECT count(*) FROM messages_fts_idx").fetchone()[0])
    queries = ["部署", "机房", "钢琴"]
    op50, op99, _ = latencies(lambda q: db.search_messages(q, limit=20), queries, rounds)
    np50, np99, _ = latencies(lambda q: naive_search(naive, q), queries, rounds)
    print(f"  ours  p50 {op50:6.2f} ms  p99 {op99:6.2f} ms   (word index: {segments} segment entries)")
    print(f"  naive p50 {np50:6.2f} ms  p99 {np99:6.2f} ms   ratio naive/ours p50 {np50 / op50:.2f}x (target >= 1)")
    db.close()
    naive.close()


def bench_sessions(n: int, workdir: str) -> None:
    """list_sessions_rich over `n` sessions of 1,000 people, three messages each."""
    print(f"\n=== list_sessions_rich over {n:,} sessions ===", flush=True)
    db = SessionDB(os.path.join(workdir, f"sessions_{n}.db"))
    t0 = time.time() - n * 60

    async def load() -> None:
        for start in range(0, n, 2000):
            batch = range(start, min(n, start + 2000))
            await asyncio.gather(
                *(
                    db.acreate_session(
                        f"l{i:07d}",
                        "telegram" if i % 3 else "discord",
                        user_id=f"p{i % 1000}",
                        started_at=t0 + i * 60,
                        title=f"topic {i}" if i % 4 == 0 else None,
                    )
                    for i in batch
                )
            )
            await asyncio.gather(
                *(
                    db.aappend_message(
                        f"l{i:07d}",
                        "user",
                        f"question {i} about deploy",
                        user_id=f"p{i % 1000}",
                        timestamp=t0 + i * 60 + 1,
                    )
                    for i in batch
                )
            )

    asyncio.run(load())
    for label, kwargs in (
        ("newest 20", {}),
        ("of one person", {"user_id": "p7"}),
        ("of a person with none", {"user_id": "nobody"}),
        ("of one source, page 10", {"source": "discord", "offset": 200}),
        ("titled, of one person", {"user_id": "p7", "titled_only": True}),
    ):
        p50, p99, _ = latencies(lambda q: db.list_sessions_rich(limit=20, **kwargs), ["-"], 100)
        print(f"  {label:28} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms   (reference: ~48 ms for 2,000 sessions)")
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--naive-rounds", type=int, default=40)
    parser.add_argument(
        "--list-sessions", type=int, default=100_000, help="sessions for the listing benchmark (0: skip)"
    )
    parser.add_argument("--appends", type=int, default=5000, help="write-path appends (0: skip)")
    parser.add_argument("--naive-appends", type=int, default=0, help="the baseline's write-path appends (0: as ours)")
    parser.add_argument("--rounds-writes", type=int, default=5, help="interleaved rounds of the write path")
    parser.add_argument("--naive-max", type=int, default=200_000, help="largest --sizes store with a naive baseline")
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--fresh", type=int, default=20_000, help="fresh-ingest query store size (0: skip)")
    parser.add_argument("--workdir", default=None, help="where the databases go (default: a temp dir, removed)")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="chinwag-bench-")
    os.makedirs(workdir, exist_ok=True)
    print(f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, dir {workdir}")
    try:
        if args.appends:
            bench_writes(args.appends, args.chats, workdir, args.naive_appends, args.rounds_writes)
        if args.fresh:
            bench_fresh_query(args.fresh, workdir, args.rounds)
        if args.list_sessions:
            bench_sessions(args.list_sessions, workdir)
        for n in args.sizes:
            bench_size(n, workdir, args.rounds, args.naive_rounds, with_naive=n <= args.naive_max)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
