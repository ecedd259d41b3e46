"""The inbox and outbox tables (gateway.storage.inbox / outbox) on a real SQLite file, through the
DB's single writer: dedup by (platform, event id), arrival order, done marks, parts sent, and
pruning in batches only what is done and old."""

from __future__ import annotations

import time

import pytest

from gateway.db import SessionDB
from gateway.storage import inbox, outbox
from gateway.storage.schema import MIGRATIONS, migrate

pytestmark = pytest.mark.both_backends


async def test_inbox_refuses_a_redelivery_at_any_stage(db):
    first = await db.ainbox_add("telegram", "u1", "key:a", '{"text": "hi"}', time.time())
    assert first is not None
    assert await db.ainbox_add("telegram", "u1", "key:a", '{"text": "hi"}', time.time()) is None  # queued
    assert await db.ainbox_add("feishu", "u1", "key:b", "{}", time.time()) is not None  # another platform
    await db.ainbox_finish([first])
    assert await db.ainbox_add("telegram", "u1", "key:a", "{}", time.time()) is None  # answered long ago


async def test_an_id_seen_before_the_inbox_existed_is_still_a_duplicate(db):
    await db.amark_event_seen("feishu", "om_old")  # the pre-inbox dedup table of an upgraded DB
    assert await db.ainbox_add("feishu", "om_old", "k", "{}", time.time()) is None


async def test_unfinished_entries_come_back_in_arrival_order_with_their_turn_state(db):
    ids = [await db.ainbox_add("telegram", f"e{i}", f"k{i % 2}", f'{{"n": {i}}}', time.time()) for i in range(5)]
    db.write(lambda conn, ev: inbox.start(conn, ids[1], 77))
    await db.ainbox_finish([ids[0], ids[3]], "answered")
    rows = db.inbox_unfinished()
    assert [r["id"] for r in rows] == [ids[1], ids[2], ids[4]]
    assert rows[0]["started_at"] and rows[0]["user_message_id"] == 77 and rows[0]["attempts"] == 1
    assert rows[1]["started_at"] is None
    assert db.inbox_backlog() == 3
    assert await db.ainbox_finish([ids[1], ids[1]], "stopped") == 1  # finishing twice counts once


async def test_the_newest_entry_of_each_chat_of_a_platform(db):
    """What Discord's catch-up reads after (PlatformAdapter.catch_up_from): done or not, per chat key."""
    for event, key in [("d1", "dm:a"), ("d2", "ch:b"), ("d3", "dm:a"), ("t1", "dm:a")]:
        platform = "telegram" if event.startswith("t") else "discord"
        await db.ainbox_add(platform, event, key, f'{{"event": "{event}"}}', time.time())
    rows = db.read(lambda conn: inbox.latest_per_chat(conn, "discord"))
    assert [(r["chat_key"], r["event_id"]) for r in rows] == [("ch:b", "d2"), ("dm:a", "d3")]


async def test_outbox_records_parts_and_lists_what_is_unsent(db):
    a = db.write(lambda conn, ev: outbox.add(conn, platform="telegram", chat_key="k", target="{}", text="one"))
    b = db.write(lambda conn, ev: outbox.add(conn, platform="telegram", chat_key="k", target="{}", text="two"))
    await db.aoutbox_record(a, 1, ["m1"], done=False)  # the first part is out (a stream's first send)
    rows = db.outbox_unsent()
    assert [(r["id"], r["parts_sent"], r["platform_ids"]) for r in rows] == [(a, 1, '["m1"]'), (b, 0, None)]
    await db.aoutbox_record(a, 2, ["m1", "m2"], done=True)
    assert [r["id"] for r in db.outbox_unsent()] == [b] and db.outbox_backlog() == 1


async def test_prune_takes_only_old_done_rows_a_batch_at_a_time(db):
    old = time.time() - 3 * 24 * 3600
    ids = [await db.ainbox_add("telegram", f"p{i}", "k", "{}", old) for i in range(7)]
    db.write(lambda conn, ev: inbox.finish(conn, ids[:5], now=old))
    await db.ainbox_finish(ids[5:6])  # done just now: kept
    cutoff = time.time() - inbox.DONE_TTL_SECONDS
    assert db.write(lambda conn, ev: inbox.prune(conn, cutoff, limit=3)) == 3
    assert db.write(lambda conn, ev: inbox.prune(conn, cutoff, limit=3)) == 2
    assert db.write(lambda conn, ev: inbox.prune(conn, cutoff, limit=3)) == 0
    left = db.read(lambda conn: [r[0] for r in conn.execute("SELECT id FROM inbox ORDER BY id")])
    assert left == ids[5:]  # the fresh done one and the open one
    sent = db.write(lambda conn, ev: outbox.add(conn, platform="t", chat_key="k", target="{}", text="x", now=old))
    db.write(lambda conn, ev: outbox.record_parts(conn, sent, 1, ["m"], True, now=old))
    unsent = db.write(lambda conn, ev: outbox.add(conn, platform="t", chat_key="k", target="{}", text="y", now=old))
    assert db.write(lambda conn, ev: outbox.prune(conn, cutoff)) == 1
    assert [r["id"] for r in db.outbox_unsent()] == [unsent]


def test_a_database_from_before_the_inbox_is_upgraded_keeping_its_data(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, target=len(MIGRATIONS) - 1)
    conn.execute("INSERT INTO processed_events VALUES ('telegram', 'x', 1.0)")
    conn.close()
    with SessionDB(path) as db:
        assert db.is_event_seen("telegram", "x") and db.inbox_backlog() == 0 and db.outbox_backlog() == 0
