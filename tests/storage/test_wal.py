"""The write-ahead log stays bounded: under one-at-a-time appends, under many chats at once, with a
reader connection left open, and it is cut back once the writes stop. Real SQLite files; the bound
is test-sized (CHECKPOINT) so a few hundred appends cross it many times."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time

import pytest

from gateway.db import SessionDB
from gateway.storage.connect import connect
from tests.fakes.loopback import wait_until_blocking

CHECKPOINT = 128 * 1024
TEXT = "a message about docker timeout and 部署 /srv/app-{i} " * 4


def wal_size(path) -> int:
    return os.path.getsize(str(path) + "-wal") if os.path.exists(str(path) + "-wal") else 0


def one_batch_bound(db: SessionDB) -> int:
    """The bound: the threshold plus what one batch (and its index upkeep) can add past it."""
    return CHECKPOINT + 2 * 256 * 1024


def test_wal_stays_bounded_under_sequential_appends_and_is_cut_back_when_idle(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path, checkpoint_bytes=CHECKPOINT, idle_seconds=0.2) as db:
        db.create_session("s", "local")
        peak = 0
        for i in range(600):
            db.append_message("s", "user", TEXT.format(i=i))
            peak = max(peak, wal_size(path))
        stats = db.wal_stats()
        assert stats["wal_written_bytes"] > 4 * CHECKPOINT  # the log really was filled several times over
        assert stats["checkpoints"] >= 3
        assert peak <= one_batch_bound(db), peak
        assert wait_until_blocking(lambda: wal_size(path) == 0, 10), wal_size(path)  # idle: truncated
        assert db.count_messages() == 600
        assert len(db.search_messages("部署", limit=1000)) == 600  # every message indexed


def test_wal_stays_bounded_with_many_chats_at_once(tmp_path):
    path = tmp_path / "state.db"
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, wal_size(path))
            time.sleep(0.002)

    with SessionDB(path, checkpoint_bytes=CHECKPOINT, idle_seconds=0.2) as db:

        async def chats() -> None:
            await asyncio.gather(*(db.acreate_session(f"c{c}", "telegram") for c in range(50)))

            async def chat(c: int) -> None:
                for i in range(20):
                    await db.aappend_message(f"c{c}", "user", TEXT.format(i=i))

            await asyncio.gather(*(chat(c) for c in range(50)))

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            asyncio.run(chats())
        finally:
            done.set()
            sampler.join()
        assert db.wal_stats()["wal_written_bytes"] > 4 * CHECKPOINT
        assert peak <= one_batch_bound(db), peak
        assert wait_until_blocking(lambda: wal_size(path) == 0, 10)
        assert db.count_messages() == 1000


def test_an_open_reader_does_not_pin_the_wal(tmp_path):
    """Readers keep their connections between reads (one per thread); a connection left open
    after reads, and statements read only in part, must not hold a snapshot."""
    path = tmp_path / "state.db"
    with SessionDB(path, checkpoint_bytes=CHECKPOINT, idle_seconds=0.2) as db:
        db.create_session("s", "local")
        for i in range(50):
            db.append_message("s", "user", TEXT.format(i=i))
        reads_done = threading.Event()
        release = threading.Event()

        def reader() -> None:  # this thread's read connection stays open until release
            db.get_messages("s")
            db.search_messages("docker")
            db.list_sessions_rich()
            db.get_session("s")
            db.find_session("s")
            reads_done.set()
            release.wait()

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            assert reads_done.wait(10)
            before = db.wal_stats()["checkpoints"]
            peak = 0
            for i in range(400):
                db.append_message("s", "user", TEXT.format(i=i))
                peak = max(peak, wal_size(path))
            assert db.wal_stats()["checkpoints"] > before
            assert peak <= one_batch_bound(db), peak
            assert wait_until_blocking(lambda: wal_size(path) == 0, 10)
        finally:
            release.set()
            thread.join()


def test_a_reader_holding_a_snapshot_delays_the_checkpoint_but_not_the_writes(tmp_path):
    """An outside connection in an open read transaction keeps the log from restarting: the writes
    go on (nothing waits on the checkpoint for more than a moment), and the log is cut back as soon
    as the snapshot ends."""
    path = tmp_path / "state.db"
    with SessionDB(path, checkpoint_bytes=CHECKPOINT, idle_seconds=0.2) as db:
        db.create_session("s", "local")
        db.append_message("s", "user", "first")
        holder = connect(str(path))
        holder.execute("BEGIN")
        holder.execute("SELECT count(*) FROM messages").fetchone()  # the snapshot is taken here
        try:
            for i in range(300):
                db.append_message("s", "user", TEXT.format(i=i))
            assert db.wal_stats()["checkpoints_busy"] > 0
            assert wal_size(path) > CHECKPOINT  # pinned, as SQLite must
        finally:
            holder.execute("COMMIT")
            holder.close()
        assert wait_until_blocking(lambda: wal_size(path) == 0, 10)
        assert db.count_messages() == 301


def test_messages_left_unindexed_by_a_crash_are_indexed_on_open(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "local")
        db.append_message("s", "user", "indexed before the crash")
    # what a kill between a commit and its index batch leaves: a message above the mark
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s', 'user', 'quokka 机房 ERR_77', 1.0)"
    )
    raw.close()
    with SessionDB(path) as db:
        assert [h["snippet"] for h in db.search_messages("quokka")] == ["«quokka» 机房 ERR_77"]
        assert len(db.search_messages("机房")) == 1
        assert len(db.search_messages("ERR_77")) == 1
        assert db.delete_session("s")
        assert db.search_messages("quokka") == []
        assert db.read(lambda c: c.execute("PRAGMA integrity_check").fetchone()[0]) == "ok"


def test_a_new_database_gets_small_pages_and_an_existing_one_keeps_its_own(tmp_path):
    from gateway.storage.connect import PAGE_SIZE

    new = tmp_path / "new.db"
    db = SessionDB(new)
    db.create_session("s", "local")
    db.append_message("s", "user", TEXT.format(i=1))
    assert db.read(lambda c: c.execute("PRAGMA page_size").fetchone()[0]) == PAGE_SIZE
    db.close()

    # a database made before (4096-byte pages, WAL, with data) opens, keeps its pages and works
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE kept (x)")
    conn.close()
    db = SessionDB(old)
    db.create_session("s", "local")
    db.append_message("s", "user", TEXT.format(i=2))
    assert db.read(lambda c: c.execute("PRAGMA page_size").fetchone()[0]) == 4096
    assert [m["content"] for m in db.get_messages("s")] == [TEXT.format(i=2)]
    assert db.search_messages("docker")
    db.close()


def test_commits_are_fsynced_unless_synchronous_normal_is_chosen(tmp_path):
    """FULL (2) by default on the writer's connection; NORMAL (1) only when asked; nothing else."""

    def level(db: SessionDB) -> int:
        return db.write(lambda conn, events: conn.execute("PRAGMA synchronous").fetchone()[0])

    with SessionDB(tmp_path / "durable.db") as db:
        assert level(db) == 2
    with SessionDB(tmp_path / "relaxed.db", synchronous="normal") as db:
        assert level(db) == 1
        db.create_session("s", "local")
        assert db.append_message("s", "user", "kept") == 1
    with SessionDB(tmp_path / "relaxed.db") as db:
        assert level(db) == 2 and db.get_messages("s")[0]["content"] == "kept"
    with pytest.raises(ValueError, match="synchronous must be one of full, normal"):
        SessionDB(tmp_path / "other.db", synchronous="off")


def wal_commit_count(wal_path: str, page_size: int) -> int:
    """Commits in the current log generation: frames whose header carries the database size
    (https://sqlite.org/walformat.html)."""
    import struct
    from pathlib import Path

    raw = Path(wal_path).read_bytes()
    salt, commits, offset = raw[16:24], 0, 32
    while offset + 24 + page_size <= len(raw) and raw[offset + 8 : offset + 16] == salt:
        commits += struct.unpack(">I", raw[offset + 4 : offset + 8])[0] != 0
        offset += 24 + page_size
    return commits


def test_the_index_batch_rides_in_an_append_commit_and_a_failing_rider_fails_nothing(tmp_path):
    """While appends keep coming, the deferred index batch commits with the next append (no fsync
    of its own): the log holds exactly one commit per append."""
    path = tmp_path / "rider.db"
    db = SessionDB(path, checkpoint_bytes=1 << 40, idle_seconds=3600)  # keep every frame, never idle
    db._index.batch = 4
    db.create_session("s", "local")
    side = sqlite3.connect(path)
    side.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # count the appends only
    page_size = side.execute("PRAGMA page_size").fetchone()[0]
    for i in range(10):
        db.append_message("s", "user", f"quokka number {i}")
    indexed = side.execute("SELECT indexed_upto FROM fts_state").fetchone()[0]
    assert indexed >= 8  # two batches of 4 rode along without waiting for idle
    assert wal_commit_count(str(path) + "-wal", page_size) == 10
    side.close()

    def broken():
        return lambda conn, events: conn.execute("INSERT INTO no_such_table VALUES (1)")

    db._writer.add_rider(broken)
    assert db.append_message("s", "user", "still committed") == 11
    assert db.get_messages("s")[-1]["content"] == "still committed"
    assert len(db.search_messages("quokka", limit=20)) == 10
    db.close()


def test_the_full_text_indexes_merge_eight_segments_at_a_time(tmp_path):
    with SessionDB(tmp_path / "merge.db") as db:
        for table in ("messages_fts", "messages_ident"):
            value = db.read(lambda c: c.execute(f"SELECT v FROM {table}_config WHERE k = 'automerge'").fetchone())
            assert value is not None and value[0] == 8
