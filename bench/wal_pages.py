"""Which pages one chat's sequential appends write: the WAL frames of each commit, by b-tree.

    python bench/wal_pages.py                 # 600 appends into a new database
    python bench/wal_pages.py --appends 1000 --page-size 4096

The log is read straight from the `-wal` file (https://sqlite.org/walformat.html: a 32-byte header,
then frames of a 24-byte header, page number and, on a commit's last frame, the database size, and
the page), with the writer's checkpoints held off so every frame stays. Each page number is named by
the `dbstat` table. Commits that touch a full-text index are the deferred indexer's batches
(gateway/storage/indexer.py); the others are appends. This is what showed a one-message commit
writing ~5.5 pages whatever their size, hence 2048-byte pages for new databases
(gateway/storage/connect.py), and one of them the AUTOINCREMENT counter, dropped in schema v9 (4.6).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sqlite3
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import generate
from gateway.db import SessionDB


def wal_commits(wal_path: str, page_size: int) -> list[list[int]]:
    """The page numbers of each commit in the current log generation, oldest first."""
    raw = Path(wal_path).read_bytes()
    salt, commits, frames, offset = raw[16:24], [], [], 32
    while offset + 24 + page_size <= len(raw) and raw[offset + 8 : offset + 16] == salt:
        page, db_size = struct.unpack(">II", raw[offset : offset + 8])
        frames.append(page)
        if db_size:  # a commit's last frame
            commits.append(frames)
            frames = []
        offset += 24 + page_size
    return commits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=600)
    parser.add_argument("--page-size", type=int, default=0, help="make the database with these pages (0: chinwag's)")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="chinwag-walpages-")
    path = os.path.join(workdir, "state.db")
    try:
        if args.page_size:
            made = sqlite3.connect(path)
            made.execute(f"PRAGMA page_size = {args.page_size}")
            made.execute("PRAGMA journal_mode = WAL")
            made.close()
        db = SessionDB(path, checkpoint_bytes=1 << 40, idle_seconds=3600)  # keep every frame
        db.create_session("one", "local")
        side = sqlite3.connect(path)
        side.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # count the appends only
        texts = [(m.role, m.content) for m in generate(args.appends, seed=11)]
        started = time.perf_counter()
        for role, text in texts:
            db.append_message("one", role, text)
        seconds = time.perf_counter() - started
        page_size = side.execute("PRAGMA page_size").fetchone()[0]
        names = {page: name for name, page in side.execute("SELECT name, pageno FROM dbstat")}
        commits = wal_commits(path + "-wal", page_size)
        side.close()
        db.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def is_fts(page: int) -> bool:
        return names.get(page, "").startswith(("messages_fts", "messages_ident"))

    frame = page_size + 24
    groups = {
        "append": [c for c in commits if not any(map(is_fts, c))],
        "index": [c for c in commits if any(map(is_fts, c))],
    }
    n = args.appends
    print(f"page size {page_size}, {n:,} sequential appends at {n / seconds:,.0f}/s, {len(commits):,} commits")
    total = sum(map(len, commits))
    print(f"WAL written per message: {total * frame / n / 1024:.1f} KB", end="")
    print("".join(f"; {k} commits {sum(map(len, g)) * frame / n / 1024:.1f} KB" for k, g in groups.items()))
    for label, group in groups.items():
        if not group:
            continue
        pages = collections.Counter(names.get(p, "(new page)") for c in group for p in c)
        print(f"\n{label} commits ({len(group):,}): {sum(map(len, group)) / len(group):.2f} frames each")
        for name, count in pages.most_common(12):
            print(f"  {name:28} {count / len(group):6.2f}")


if __name__ == "__main__":
    main()
