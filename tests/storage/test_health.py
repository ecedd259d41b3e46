"""The storage probe (gateway/storage/health.py) runs on a thread of its own. While a database is
down the worker threads fill with work waiting for it (psycopg's pool waits up to 30 s for a
connection), and a probe queued behind them did not even try until one of them gave up."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gateway.db import SessionDB
from gateway.storage.health import StorageHealth


async def test_the_probe_notices_storage_is_back_while_every_worker_thread_is_busy(tmp_path):
    loop = asyncio.get_running_loop()
    workers = ThreadPoolExecutor(4)
    loop.set_default_executor(workers)
    db = SessionDB(tmp_path / "state.db")
    try:
        health = StorageHealth(db)

        released = threading.Event()

        def work() -> float:  # what a worker does while the database is down: wait
            released.wait(30.0)
            return time.monotonic()

        busy = asyncio.gather(*(loop.run_in_executor(None, work) for _ in range(4)))
        health.failed(sqlite3.OperationalError("database or disk is full"))  # and it commits again at once
        await health.recovered()
        recovered_at = time.monotonic()
        released.set()
        assert recovered_at < min(await busy), "the probe waited for a worker thread"
    finally:
        db.close()
        workers.shutdown()
