"""What one reading of `chinwag_media_bytes` costs (SessionDB.media_bytes: the bytes of kept files,
each counted once, summed over the attachments table), by table size -- the reason /metrics reads it
through metrics.Sampled, in a worker thread, rather than on the event loop at each scrape.

    python -m bench.media_bytes                  # 10k and 100k attachment rows
    python -m bench.media_bytes --rows 1000000
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

from gateway.db import SessionDB, new_session_id


def measure(rows: int, repeat: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp, SessionDB(Path(tmp) / "state.db") as db:
        sid = new_session_id()
        db.create_session(sid, "local")
        message = db.append_message(sid, "user", "photos")
        values = [
            (message, "image", "image/jpeg", 5_000_000, hashlib.sha256(str(i // 2).encode()).hexdigest(), "p.jpg", 0.0)
            for i in range(rows)  # every file sent twice: the sum must count it once
        ]
        db.write(
            lambda conn, events: conn.executemany(
                "INSERT INTO attachments (message_id, kind, mime_type, bytes, sha256, file_name, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                values,
            )
        )
        db.media_bytes()  # warm the page cache
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            db.media_bytes()
            times.append(time.perf_counter() - started)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    for rows in args.rows:
        times = measure(rows, args.repeat)
        print(
            f"{rows:>9,} attachment rows: media_bytes p50 {statistics.median(times) * 1000:.1f} ms, "
            f"max {max(times) * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
