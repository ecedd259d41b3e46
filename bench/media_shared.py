"""What the replicas' shared copy of the attachments' files costs (gateway/storage/postgres/files.py):
keeping a photo on disk alone (SQLite) beside disk plus its `media_files` row (Postgres), and reading
it on a replica whose disk lacks it, the first time (from the database) and after (its cache).

    python -m bench.media_shared                 # 20 photos of 5 MB
    python -m bench.media_shared --photos 50 --mb 1

The server is tests/storage/postgres/server.py's private PostgreSQL with fsync on, as bench/postgres.py
runs it. Each photo's bytes differ (the stores are content-addressed).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from bench.media import photo_bytes
from gateway.storage.media import MediaStore
from gateway.storage.postgres.db import PostgresSessionDB
from tests.storage.postgres.server import PrivatePostgres


def timed(fn: Callable[[], object], into: list[float]) -> None:
    started = time.perf_counter()
    fn()
    into.append(time.perf_counter() - started)


def run(photos: int, size: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, PrivatePostgres(durable=True) as server:
        with PostgresSessionDB(server.create_database()) as db:
            disk = MediaStore(Path(tmp) / "disk")
            one = MediaStore(Path(tmp) / "one", shared=db.shared_files())
            two = MediaStore(Path(tmp) / "two", shared=db.shared_files())
            kept_disk: list[float] = []
            kept_shared: list[float] = []
            first: list[float] = []
            cached: list[float] = []
            for i in range(photos):
                data = photo_bytes(i, size)
                sha = hashlib.sha256(data).hexdigest()
                timed(lambda: disk.save_bytes(data), kept_disk)
                timed(lambda: one.save_bytes(data), kept_shared)
                timed(lambda: two.read(sha), first)
                timed(lambda: two.read(sha), cached)
    ms = lambda xs: f"p50 {statistics.median(xs) * 1000:7.1f} ms   max {max(xs) * 1000:7.1f} ms"
    print(f"{photos} photos of {size / (1 << 20):g} MB")
    print(f"keep, disk alone (SQLite)           {ms(kept_disk)}")
    print(f"keep, disk + media_files (Postgres) {ms(kept_shared)}")
    print(f"read on another replica, first      {ms(first)}")
    print(f"read on another replica, cached     {ms(cached)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=int, default=20)
    parser.add_argument("--mb", type=float, default=5.0, help="size of each photo")
    args = parser.parse_args()
    run(args.photos, int(args.mb * (1 << 20)))


if __name__ == "__main__":
    main()
